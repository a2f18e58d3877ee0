// Models by name through the Hugging Face hub cache, offline: "meta-llama/Llama-3.1-8B-Instruct"
// (or "org/name@revision") becomes the snapshot directory huggingface_hub downloaded it to,
// <cache>/models--org--name/snapshots/<commit>/. Nothing is fetched; a name not in the cache fails
// with the command that fetches it. Layout, environment variables and sources: docs/hub_cache.md.
#pragma once

#include <string>

namespace luatune {

// The hub cache directory, in huggingface_hub's order: HF_HUB_CACHE, HUGGINGFACE_HUB_CACHE (its
// legacy name), $HF_HOME/hub, $XDG_CACHE_HOME/huggingface/hub, ~/.cache/huggingface/hub. A leading
// "~" is expanded; a variable set to "" counts as unset.
std::string hub_cache_dir();
// What chose hub_cache_dir(): the variable's name ("HF_HUB_CACHE", "HF_HOME", ...) or "default".
std::string hub_cache_dir_source();

// Whether `value` is shaped like a Hub model id: "org/name" or "org/name@revision", each part made
// of [A-Za-z0-9._-], beginning and ending with [A-Za-z0-9_], without "--" or "..", not ending in
// ".git" (huggingface_hub's validate_repo_id). A bare "name" is not
// (it resolves only when the cache holds models--name, see model_path_resolve).
bool hub_name_shaped(const std::string& value);

// `name_or_path` unchanged when it exists locally (file or directory); else, for a Hub id, the
// cached snapshot directory: no revision reads refs/main; "@rev" reads refs/<rev>, else takes rev as
// a commit hash (full, or a prefix matching one snapshot). The snapshot must hold config.json,
// tokenizer.json or tokenizer_config.json. Throws Error (one line) otherwise: for a Hub id, where it
// looked, which variable chose the cache, and the `huggingface-cli download` command that fetches it;
// for any other value, that it does not exist.
// A path to a .gguf file resolves to its Hugging Face directory, converted once into a cache
// (host/io/gguf_convert.h; $LUATUNE_GGUF_CACHE, else ~/.cache/luatune/gguf): models.load("x.gguf"),
// tokenizer.load("x.gguf") and base_model=x.gguf all load that.
std::string model_path_resolve(const std::string& name_or_path);
// The same lookup without throwing: false with the message model_path_resolve would throw in *why
// (why may be null). For config checkers that look at paths without loading.
bool model_path_available(const std::string& name_or_path, std::string* why);
// For loaders with their own "not found" message: the snapshot directory when `value` names a
// cached Hub model, `value` unchanged when it exists locally or is no Hub id (the caller's check then
// names it); throws as model_path_resolve for a Hub id missing from the cache.
std::string model_path_from_hub(const std::string& value);

// "org/name" when `dir` is a snapshot directory of the hub cache (.../models--org--name/snapshots/
// <commit>), else "". Saved metadata (adapter_config.json's base_model_name_or_path, a GGUF's name)
// keeps the name, as peft and transformers do, rather than the cache path.
std::string hub_model_name_of(const std::string& dir);

}  // namespace luatune
