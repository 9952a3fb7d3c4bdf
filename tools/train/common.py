"""Small helpers shared by the tools/train scripts (no torch import here)."""

import json
import os
import sys
import time


def log(*parts):
    """Progress line to stdout, flushed (the logs are read while jobs run).
    Never raises: a closed stdout (e.g. a killed `| tee`) must not stop training."""
    try:
        print(time.strftime("[%H:%M:%S]"), *parts, flush=True)
    except (BrokenPipeError, OSError, ValueError):
        pass


def die(msg, code=1):
    print("error: " + msg, file=sys.stderr, flush=True)
    sys.exit(code)


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)


def read_json(path):
    with open(path) as f:
        return json.load(f)


def read_blocks(path, join_lines=False, min_chars=1):
    """Yields the blank-line-separated blocks (stories) of a text file.

    Lines inside a block keep their newlines unless join_lines, which joins
    them with single spaces (for hard-wrapped prose such as sotu.txt)."""
    buf = []

    def flush():
        if buf:
            text = (" ".join(s.strip() for s in buf)) if join_lines else "\n".join(buf)
            text = text.strip()
            buf.clear()
            if len(text) >= min_chars:
                return text
        buf.clear()
        return None

    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\r\n")
            if line.strip() == "":
                t = flush()
                if t is not None:
                    yield t
            else:
                buf.append(line)
    t = flush()
    if t is not None:
        yield t


def fmt_time(s):
    s = int(max(0, s))
    if s >= 3600:
        return "%dh%02dm" % (s // 3600, (s % 3600) // 60)
    if s >= 60:
        return "%dm%02ds" % (s // 60, s % 60)
    return "%ds" % s


def fmt_num(n):
    if n >= 1e9:
        return "%.2fG" % (n / 1e9)
    if n >= 1e6:
        return "%.2fM" % (n / 1e6)
    if n >= 1e3:
        return "%.1fk" % (n / 1e3)
    return "%d" % n
