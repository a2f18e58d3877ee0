#!/usr/bin/env bash
# scripts/device-wheels.sh [--lock] DIR: downloads into DIR the wheels the GPU benchmark's peers need
# (bench/gpu/peer-requirements.txt: bitsandbytes, peft, liger-kernel, trl, unsloth) beyond what the GPU
# machine has, exactly as bench/gpu/peer-requirements.lock pins them, for its Python (CPython 3.12,
# manylinux x86_64), and proves that they resolve offline. torch 2.11 (CUDA 13) with its CUDA wheels and
# triton, transformers 5.17 and the other packages PRESENT_* name below are never downloaded. The wheels go
# into one folder per bundle (DIR/qlora-liger, DIR/unsloth), each small enough to travel in one device
# call (at most 64 MiB with the working tree). Idempotent: a wheel already there with its locked hash is
# kept, a file the lock does not name is removed. Needs network. docs/gpu.md says how the harness
# installs them on the GPU machine (its peer_wheels step).
#   scripts/device-wheels.sh .wheels          # fill .wheels (ignored by git), check it resolves offline
#   scripts/device-wheels.sh --lock .wheels   # first re-resolve the lock from peer-requirements.txt
set -euo pipefail
lock_first=0
if [ "${1:-}" = --lock ]; then lock_first=1; shift; fi
dir=${1:?usage: scripts/device-wheels.sh [--lock] DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
reqs=$root/bench/gpu/peer-requirements.txt
lock=$root/bench/gpu/peer-requirements.lock
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# ---- What the GPU machine has (/opt/torch/.venv, Python 3.12; its package list of 2026-11). The lock is
# resolved against these versions, and they, and whatever only they need, stay out of it.
PRESENT_PINS=(torch==2.11.0 triton==3.6.0 transformers==5.17.0 torchvision==0.26.0 numpy==2.5.2 tokenizers==0.23.2
              sentencepiece==0.2.2 huggingface-hub==1.33.0 safetensors==0.8.0 accelerate==1.15.0)
PRESENT_CUDA='^(nvidia-.*|cuda-.*)$'  # torch's CUDA runtime wheels, at the versions torch 2.11.0 pins
# Large packages there whose version was not read: left out on the assumption that it meets the peers'
# bounds (pyarrow>=21 and pandas>=2.1.1 for datasets and trl, pygments>=2.13 for rich, none on pillow and
# aiohttp). Were one too old, the offline install there fails naming it: remove it here and carry it. The
# small ones the peers need are carried whether the machine has them or not (pip takes them only if needed).
PRESENT_UNPINNED=(pyarrow pandas pillow aiohttp pygments)
DEVICE_TORCH=2.11.0+cu130  # its full version there, local label included
PIP_PIN=pip==26.3          # pip 23 checks a dependency's Requires-Python against this host's Python

# The GPU machine's interpreter and platform. pip does not widen a manylinux_2_28 tag to older glibc
# versions by itself, so every one from 2_28 down is named.
target=(--only-binary=:all: --python-version 3.12 --implementation cp --abi cp312)
for g in $(seq 28 -1 5); do target+=(--platform "manylinux_2_${g}_x86_64"); done
target+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64)

py=${PYTHON:-python3}
if ! "$py" -c 'import pip, sys; sys.exit(int(pip.__version__.split(".")[0]) < 26)' 2>/dev/null; then
  "$py" -m venv "$tmp/pip-venv"  # a recent pip of our own, gone at exit
  "$tmp/pip-venv/bin/python" -m pip install -q --disable-pip-version-check "$PIP_PIN"
  py=$tmp/pip-venv/bin/python
fi
pip=("$py" -m pip --disable-pip-version-check --no-input)

# ---- 1. the lock (only with --lock): pip's resolver on the real metadata of everything (PEP 658: no
# torch wheel is downloaded); then, from each bundle's roots, the dependency graph walked down to the
# present packages; each wheel reached goes into the first bundle that reaches it.
if [ "$lock_first" = 1 ]; then
  printf '%s\n' "${PRESENT_PINS[@]}" >"$tmp/present.txt"
  "${pip[@]}" install -q --dry-run --ignore-installed --target "$tmp/resolve" --report "$tmp/resolve.json" \
    "${target[@]}" -c "$tmp/present.txt" -r "$reqs"
  PRESENT="${PRESENT_PINS[*]} ${PRESENT_UNPINNED[*]}" \
    "$py" - "$tmp/resolve.json" "$reqs" "$lock" "$PRESENT_CUDA" <<'EOF'
import json, os, re, sys
from pip._vendor.packaging.requirements import Requirement  # pip's own copy: no other package needed
report, reqs, lock, present_cuda = sys.argv[1:]
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
pinned = {norm(p.split("==")[0]) for p in os.environ["PRESENT"].split() if "==" in p}
present = {norm(p.split("==")[0]) for p in os.environ["PRESENT"].split()}
is_present = lambda n: n in present or re.match(present_cuda, n)
env = {"python_version": "3.12", "python_full_version": "3.12.3", "implementation_name": "cpython",
       "implementation_version": "3.12.3", "os_name": "posix", "platform_machine": "x86_64",
       "platform_system": "Linux", "sys_platform": "linux", "platform_python_implementation": "CPython"}
items = {norm(i["metadata"]["name"]): i for i in json.load(open(report))["install"]}
bundles = {}  # bundle -> root names, in the file's order
for line in open(reqs):
    m = re.match(r"^([A-Za-z0-9_.-]+)==\S+\s+#\s*\[([\w-]+)\]", line)
    if m:
        bundles.setdefault(m.group(2), []).append(norm(m.group(1)))
where, frontier = {}, set()
for bundle, roots in bundles.items():
    todo, visited = [(r, ()) for r in roots], set()
    while todo:
        name, extras = todo.pop()
        if (name, extras) in visited:
            continue
        visited.add((name, extras))
        if is_present(name):
            frontier.add(name)
            continue
        where.setdefault(name, bundle)
        for spec in items[name]["metadata"].get("requires_dist") or []:
            req = Requirement(spec)
            if req.marker is None or any(req.marker.evaluate(dict(env, extra=e)) for e in ("",) + tuple(extras)):
                todo.append((norm(req.name), tuple(req.extras)))
def version(n):
    return items[n]["metadata"]["version"]
with open(lock, "w") as f:
    f.write("# bench/gpu/peer-requirements.lock: the wheels the GPU benchmark's peers need on the GPU machine\n"
            "# (CPython 3.12, manylinux x86_64) beyond what it has, with their hashes, one section per bundle\n"
            "# (a folder of scripts/device-wheels.sh's DIR). Generated by scripts/device-wheels.sh --lock from\n"
            "# peer-requirements.txt; do not edit. The peers' dependencies the GPU machine has, not downloaded:\n")
    for n in sorted(frontier):
        seen = "its version there" if n in pinned else "what torch 2.11.0 pins" if re.match(present_cuda, n) \
            else "version there not read: assumed to fit"
        f.write("#   present: %s==%s (%s)\n" % (n, version(n), seen))
    for bundle in bundles:
        f.write("\n# ---- bundle %s\n" % bundle)
        for n in sorted(x for x in where if where[x] == bundle):
            f.write("%s==%s \\\n    --hash=sha256:%s\n" % (n, version(n),
                                                         items[n]["download_info"]["archive_info"]["hashes"]["sha256"]))
print("device-wheels: %s: %s; %d present packages left out" % (
    lock, ", ".join("%s %d wheels" % (b, sum(1 for x in where.values() if x == b)) for b in bundles), len(frontier)))
EOF
fi

# ---- 2. per bundle: download what its folder lacks; remove what the lock does not name there.
"$py" - "$lock" "$dir" "$tmp" <<'EOF'
import hashlib, os, re, sys
lock, wheel_dir, tmp = sys.argv[1:]
sections = re.split(r"^# ---- bundle (\S+)\n", open(lock).read(), flags=re.M)
for bundle, body in zip(sections[1::2], sections[2::2]):
    entries = re.findall(r"^(\S+)==(\S+) \\\n\s+--hash=sha256:([0-9a-f]{64})", body, re.M)
    folder = os.path.join(wheel_dir, bundle)
    os.makedirs(folder, exist_ok=True)
    have = {}
    for f in sorted(os.listdir(folder)):
        with open(os.path.join(folder, f), "rb") as fh:
            have[hashlib.sha256(fh.read()).hexdigest()] = f
    wanted = {sha for _, _, sha in entries}
    for sha, f in have.items():
        if sha not in wanted:
            print("device-wheels: removing %s/%s (not in the lock's bundle %s)" % (bundle, f, bundle))
            os.remove(os.path.join(folder, f))
    missing = [e for e in entries if e[2] not in have]
    with open(os.path.join(tmp, "missing-%s.txt" % bundle), "w") as f:
        f.writelines("%s==%s --hash=sha256:%s\n" % e for e in missing)
    print("device-wheels: bundle %s: %d wheels, %d already in %s, %d to download" %
          (bundle, len(entries), len(entries) - len(missing), folder, len(missing)))
for f in sorted(os.listdir(wheel_dir)):
    if f not in sections[1::2]:
        print("device-wheels: %s/%s is no bundle of the lock: left alone, but do not carry it" % (wheel_dir, f))
EOF
bundles=$(sed -n 's/^# ---- bundle \(\S*\)$/\1/p' "$lock")
for b in $bundles; do
  if [ -s "$tmp/missing-$b.txt" ]; then
    "${pip[@]}" download -q --no-deps --require-hashes "${target[@]}" -d "$dir/$b" -r "$tmp/missing-$b.txt"
  fi
done

# ---- 3. the proof, per bundle: resolve its roots (and the earlier bundles') with no index, from those
# bundles' folders alone plus empty stand-ins of the present packages at the lock's versions (torch as
# DEVICE_TORCH, local label included). Every wheel the resolver takes must be a locked one of those bundles.
"$py" - "$lock" "$tmp/stubs" "$tmp/present-device.txt" "$DEVICE_TORCH" <<'EOF'
import base64, hashlib, os, re, sys, zipfile
lock, stub_dir, pins_path, device_torch = sys.argv[1:]
os.makedirs(stub_dir)
pins = []
for name, version in re.findall(r"^#   present: (\S+)==(\S+) ", open(lock).read(), re.M):
    version = device_torch if name == "torch" else version
    pins.append("%s==%s\n" % (name, version))
    dist = "%s-%s" % (re.sub(r"[-_.]+", "_", name), version)
    files = {dist + ".dist-info/METADATA": "Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (name, version),
             dist + ".dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: device-wheels\nRoot-Is-Purelib: true\n"
                                        "Tag: py3-none-any\n"}
    record = "".join("%s,sha256=%s,%d\n" % (p, base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest())
                                           .rstrip(b"=").decode(), len(t)) for p, t in files.items())
    with zipfile.ZipFile(os.path.join(stub_dir, dist + "-py3-none-any.whl"), "w") as z:
        for p, t in files.items():
            z.writestr(p, t)
        z.writestr(dist + ".dist-info/RECORD", record + dist + ".dist-info/RECORD,,\n")
open(pins_path, "w").writelines(pins)
EOF
links=(--find-links "$tmp/stubs")
seen=()
for b in $bundles; do
  links+=(--find-links "$dir/$b")
  seen+=("$b")
  grep -E "#[[:space:]]*\[($(IFS='|'; echo "${seen[*]}"))\]" "$reqs" | sed 's/[[:space:]]*#.*//' >"$tmp/roots-$b.txt"
  echo "device-wheels: offline check of ${seen[*]}: pip install --dry-run --ignore-installed --no-index" \
       "--find-links STANDINS$(printf ' --find-links %s' "${seen[@]/#/$dir/}") --target T --report R" \
       "(the CPython 3.12 manylinux x86_64 flags) -c PRESENT $(tr '\n' ' ' <"$tmp/roots-$b.txt")"
  "${pip[@]}" install -q --dry-run --ignore-installed --no-index "${links[@]}" --target "$tmp/offline-$b" \
    --report "$tmp/offline-$b.json" "${target[@]}" -c "$tmp/present-device.txt" -r "$tmp/roots-$b.txt"
  "$py" - "$tmp/offline-$b.json" "$lock" "$dir" "$tmp/stubs" "${seen[@]}" <<'EOF'
import json, os, re, sys
from urllib.parse import unquote, urlparse
report, lock, wheel_dir, stub_dir, *bundles = sys.argv[1:]
sections = re.split(r"^# ---- bundle (\S+)\n", open(lock).read(), flags=re.M)
locked = {os.path.join(wheel_dir, b): set(re.findall(r"^(\S+)==(\S+) \\$", body, re.M))
          for b, body in zip(sections[1::2], sections[2::2]) if b in bundles}
used, stubs, bad = set(), [], []
for item in json.load(open(report))["install"]:
    nv = (re.sub(r"[-_.]+", "-", item["metadata"]["name"]).lower(), item["metadata"]["version"])
    folder = os.path.dirname(unquote(urlparse(item["download_info"]["url"]).path))
    if folder == stub_dir:
        stubs.append(nv)
    elif nv in locked.get(folder, ()):
        used.add(nv)
    else:
        bad.append("%s==%s from %s" % (nv + (folder,)))
unused = sorted("%s==%s" % nv for nv in set().union(*locked.values()) - used)
if bad:
    sys.exit("device-wheels: offline check FAILED: %s" % "; ".join(bad))
print("device-wheels: offline check ok: %d locked wheels + %d present stand-ins (%s)%s" % (
    len(used), len(stubs), ", ".join("%s %s" % s for s in sorted(stubs) if s[0] in ("torch", "transformers", "triton")),
    "; locked but not taken: " + ", ".join(unused) if unused else ""))
EOF
done
# ---- sizes against the device tool's limit: 64 MiB a call, the working tree and the carried paths together.
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
tree=$( (cd "$root" && git ls-files -co --exclude-standard -z | xargs -0 stat -c %s 2>/dev/null || true) |
       awk '{s += $1} END {print s + 0}')  # a tracked file deleted here is not counted
deps=$( [ -d "$root/.deps" ] && du -sb "$root/.deps" | cut -f1 || echo 0)
for b in $bundles; do
  size=$(du -sb "$dir/$b" | cut -f1)
  echo "device-wheels: $dir/$b: $(find "$dir/$b" -name '*.whl' | wc -l) wheels, $(mib "$size") MiB;" \
       "with the working tree ($(mib "$tree") MiB) and .deps ($( [ "$deps" = 0 ] && echo "not here, about 15 MB" ||
       echo "$(mib "$deps") MiB")): $(mib $((tree + deps + size))) of the 64 MiB one device call carries"
done
echo "device-wheels: $dir: $(mib "$(du -sb "$dir" | cut -f1)") MiB in all"
