#!/usr/bin/env python3
"""Copies a shared library and sets DF_SYMBOLIC in the copy's DT_FLAGS.

Used by the sanitizer builds for libsentencepiece (core/CMakeLists.txt, the
why is in core/tokenizer/sentencepiece_wrapper.cc): DF_SYMBOLIC makes the
dynamic linker resolve the library's references to symbols it defines itself
(its bundled protobuf-lite) within the library first, the effect -Bsymbolic
would have had at its link time.

    symbolic_copy.py SRC DST
"""
import shutil
import struct
import sys

DT_NULL, DT_FLAGS, DF_SYMBOLIC = 0, 30, 0x2
PT_DYNAMIC = 2


def set_symbolic(data: bytearray, path: str) -> None:
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        sys.exit(f"{path}: not a 64-bit little-endian ELF file")
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    for i in range(phnum):
        p_type, = struct.unpack_from("<I", data, phoff + i * phentsize)
        if p_type != PT_DYNAMIC:
            continue
        offset, = struct.unpack_from("<Q", data, phoff + i * phentsize + 8)
        while True:
            tag, value = struct.unpack_from("<qQ", data, offset)
            if tag == DT_NULL:
                break
            if tag == DT_FLAGS:
                struct.pack_into("<qQ", data, offset, tag, value | DF_SYMBOLIC)
                return
            offset += 16
        sys.exit(f"{path}: no DT_FLAGS entry in .dynamic to set DF_SYMBOLIC in")
    sys.exit(f"{path}: no PT_DYNAMIC segment")


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, dst = sys.argv[1], sys.argv[2]
    with open(src, "rb") as f:
        data = bytearray(f.read())
    set_symbolic(data, src)
    with open(dst + ".tmp", "wb") as f:
        f.write(data)
    shutil.copymode(src, dst + ".tmp")
    shutil.move(dst + ".tmp", dst)


if __name__ == "__main__":
    main()
