#!/usr/bin/env python3
"""Renders tests/fixtures/chat_cases.json through each template in chat_templates.json with
Jinja2 set up the way Hugging Face transformers renders chat templates (a sandboxed environment
with trim_blocks and lstrip_blocks, the loopcontrols extension, raise_exception and tojson), and
prints one JSON document of results for tests/cpp/chat_ref_check.cpp. Run from the repository root:
    python3 tests/reference/chat_ref.py > out.json
Templates from npm packages are read from tests/reference/node/node_modules; when it is absent
those are reported as skipped and only our fixture templates are rendered."""
import json
import os
import sys

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

NODE_MODULES = "tests/reference/node/node_modules"


class TemplateRaised(Exception):
    pass


def raise_exception(message):
    raise TemplateRaised(message)


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = lambda x, indent=None: json.dumps(x, ensure_ascii=False, indent=indent)
    env.globals["raise_exception"] = raise_exception
    return env


def main():
    cases = json.load(open("tests/fixtures/chat_cases.json", encoding="utf-8"))["cases"]
    templates = json.load(open("tests/reference/chat_templates.json", encoding="utf-8"))["templates"]
    env = make_env()
    results = []
    for t in templates:
        skipped = None
        if "package" in t:
            path = os.path.join(NODE_MODULES, t["package"], "models", "tokenizer_config.json")
            source = t["package"] + "@3.7.2 tokenizer_config.json"
            if os.path.exists(path):
                config = json.load(open(path, encoding="utf-8"))
            else:
                config, skipped = {}, "not installed: " + path
        else:
            source = t["fixture"]
            config = {"chat_template": open(t["fixture"], encoding="utf-8").read(),
                      "bos_token": t.get("bos"), "eos_token": t.get("eos")}
        template = None if skipped else env.from_string(config["chat_template"])
        bos, eos = config.get("bos_token") or "", config.get("eos_token") or ""
        for c in cases:
            r = {"format": t["format"], "case": c["name"], "source": source, "bos": bos, "eos": eos}
            if skipped:
                r["skipped"] = skipped
            else:
                try:
                    r["text"] = template.render(messages=c["messages"], bos_token=bos, eos_token=eos,
                                                add_generation_prompt=c.get("add_generation_prompt", False),
                                                **c.get("options", {}))
                except (TemplateRaised, jinja2.exceptions.UndefinedError) as e:
                    r["error"] = str(e)
            results.append(r)
    json.dump({"oracle": "jinja2 %s (Hugging Face transformers' settings)" % jinja2.__version__,
               "results": results}, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
