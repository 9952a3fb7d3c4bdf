#!/usr/bin/env bash
# Regenerates the tiny fixtures (tests/fixtures/models) and the Hugging Face
# goldens (tests/golden/data, including data/configs and the Mamba-2 / Bamba
# fixtures and goldens from transformers 5). Run as `make goldens`, or
#   bash tools/goldens/make_goldens.sh [BUILD_DIR]     (default: build)
# BUILD_DIR/bin/treespec-convert-llama2c converts stories260K; when it is not
# built, make_goldens.py falls back to its Python mirror of the converter.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR="${1:-build}"
VENV=.venv
PY="$VENV/bin/python"

if [ ! -x "$PY" ]; then
  if ! /usr/bin/python3 -c 'import torch, numpy, sentencepiece, google.protobuf' 2>/dev/null; then
    echo "make_goldens: installing Debian's python3-torch python3-numpy python3-sentencepiece" \
         "python3-protobuf python3-venv" >&2
    SUDO=""; [ "$(id -u)" != 0 ] && SUDO=sudo
    $SUDO apt-get install -y -qq --no-install-recommends python3-torch python3-numpy \
      python3-sentencepiece python3-protobuf python3-venv >/dev/null
  fi
  /usr/bin/python3 -m venv --system-site-packages "$VENV"
fi
if ! "$PY" - <<'PYEOF' 2>/dev/null
import sys
from importlib.metadata import version
pins = [l.split("==") for l in open("tools/goldens/requirements.txt")
        if "==" in l and not l.lstrip().startswith("#")]
sys.exit(any(version(name.strip()) != want.strip() for name, want in pins))
PYEOF
then
  "$PY" -m pip install --quiet -r tools/goldens/requirements.txt
fi

set -x
"$PY" tools/models/tiny_model_writer.py
"$PY" tools/goldens/make_goldens.py --converter "$BUILD_DIR/bin/treespec-convert-llama2c"
# The config-layout goldens need transformers >= 5, in a venv of their own.
V5_VENV=.venv-v5
if [ ! -x "$V5_VENV/bin/python" ]; then
  /usr/bin/python3 -m venv "$V5_VENV"
fi
"$V5_VENV/bin/python" -m pip install --quiet -r tools/goldens/requirements-v5.txt
"$V5_VENV/bin/python" tools/goldens/make_config_goldens.py
# Mamba2ForCausalLM and BambaForCausalLM fixtures and goldens (transformers 5).
"$V5_VENV/bin/python" tools/goldens/make_mamba2_goldens.py
if [ -f tools/goldens/make_tokenizer_goldens.py ]; then
  "$PY" tools/goldens/make_tokenizer_goldens.py
fi
if [ -f tools/goldens/make_chat_template_goldens.py ]; then
  "$PY" tools/goldens/make_chat_template_goldens.py
fi
