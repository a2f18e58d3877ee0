// The defaults the config units resolve overrides against (test_config, test_config_file): a recipe's
// config in small, one key of each kind.
#pragma once

#include <utility>
#include <vector>

#include "host/cli/config.h"

namespace luatune {

// learning_rate = 2e-4, pack = true, output_dir = "out/lora", lora = {r = 16, targets = {"q_proj",
// "v_proj"}}, and layers = the list given.
inline ConfigValue config_test_defaults(std::vector<ConfigValue> layers) {
  ConfigValue cfg;
  cfg.fields["learning_rate"] = ConfigValue::of_number(2e-4);
  cfg.fields["pack"] = ConfigValue::of_boolean(true);
  cfg.fields["output_dir"] = ConfigValue::of_string("out/lora");
  ConfigValue lora;
  lora.fields["r"] = ConfigValue::of_number(16);
  lora.fields["targets"] =
      ConfigValue::of_list({ConfigValue::of_string("q_proj"), ConfigValue::of_string("v_proj")});
  cfg.fields["lora"] = lora;
  cfg.fields["layers"] = ConfigValue::of_list(std::move(layers));
  return cfg;
}

}  // namespace luatune
