#!/usr/bin/env python3
"""scripts/step_fingerprint.py [COMMIT]: the training step's fingerprint (host/hw/step_files.txt) of the
working tree, or of COMMIT read through git, as cmake/step_fingerprint.cmake computes it at build time:
SHA-256 over "PATH SHA256\\n" (or "PATH absent\\n") per listed path, first 12 hex digits. Used to date
the points of data/planner_calibration.json; standard library only."""
import hashlib
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read(path, commit):
    if commit is None:
        full = os.path.join(ROOT, path)
        if not os.path.isfile(full):
            return None
        with open(full, "rb") as f:
            return f.read()
    p = subprocess.run(["git", "-C", ROOT, "show", "%s:%s" % (commit, path)], capture_output=True)
    return p.stdout if p.returncode == 0 else None


def fingerprint(commit=None):
    listing = read("host/hw/step_files.txt", None)
    text = ""
    for line in listing.decode("utf-8").splitlines():
        path = line.strip()
        if not path or path.startswith("#"):
            continue
        data = read(path, commit)
        text += "%s %s\n" % (path, hashlib.sha256(data).hexdigest() if data is not None else "absent")
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


if __name__ == "__main__":
    print(fingerprint(sys.argv[1] if len(sys.argv) > 1 else None))
