#!/usr/bin/env python3
"""Is a Chromium screenshot a real picture? Counts its distinct colours (every 4th pixel) and checks
that given colours appear somewhere, for the report render tests (tests/tools/test_*_render.sh).

Usage: png_colours.py PNG MIN_COLOURS [RRGGBB ...]
Exit 0 when the screenshot has more than MIN_COLOURS colours and every RRGGBB pixel colour occurs;
1 otherwise (the reason on stderr). A PNG decoder just big enough for Chromium's screenshots
(8-bit RGB/RGBA, non-interlaced), so the tests need no imaging library."""
import struct
import sys
import zlib


def decode_rows(path):
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width, height, bpp = 8, b"", 0, 0, 3
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and colour in (2, 6), f"unsupported PNG (depth {depth}, colour type {colour})"
            bpp = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, stride = zlib.decompress(idat), width * bpp
    prev, i = bytearray(stride), 0
    for _ in range(height):
        f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b, c = prev[x], prev[x - bpp] if x >= bpp else 0
            if f == 1: line[x] = (line[x] + a) & 255
            elif f == 2: line[x] = (line[x] + b) & 255
            elif f == 3: line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        yield line, bpp
        prev = line
    print(f"{path}: {width}x{height}", end="")


def main():
    path, minimum = sys.argv[1], int(sys.argv[2])
    wanted = {bytes.fromhex(h): h for h in sys.argv[3:]}
    colours, found = set(), set()
    for line, bpp in decode_rows(path):
        colours.update(bytes(line[x:x + 3]) for x in range(0, len(line), bpp * 4))
        for rgb in wanted.keys() - found:
            at = line.find(rgb)
            while at >= 0:
                if at % bpp == 0:
                    found.add(rgb)
                    break
                at = line.find(rgb, at + 1)
    print(f", {len(colours)} colours (sampled)")
    ok = len(colours) > minimum
    if not ok:
        print(f"{path}: only {len(colours)} colours: looks blank", file=sys.stderr)
    for rgb, name in wanted.items():
        if rgb not in found:
            print(f"{path}: no pixel of colour #{name}", file=sys.stderr)
            ok = False
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
