#!/usr/bin/env bash
# Creates .venv (Python 3.12) with vla-wmrl and its dependencies, installing the system libraries the stack needs.
# Idempotent: re-running only installs what is missing. Used by `make train`, `make test` and CI.
set -euo pipefail
cd "$(dirname "$0")/.."

# FFmpeg shared libraries let torchcodec decode LeRobot's videos (without them lerobot falls back to PyAV).
# EGL/Mesa gives MuJoCo headless offscreen rendering.
if ! ldconfig -p | grep -q 'libavcodec.so.59' || ! ldconfig -p | grep -q 'libEGL.so.1'; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "[setup] installing FFmpeg and EGL system libraries with apt-get"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libavutil57 libavcodec59 libavformat59 libavdevice59 \
      libavfilter8 libswscale6 libswresample4 libegl1 libegl-mesa0 libgl1-mesa-dri >/dev/null \
      || echo "[setup] WARNING: apt-get could not install the FFmpeg/EGL libraries; video decoding falls back to PyAV"
  else
    echo "[setup] WARNING: FFmpeg 5 shared libraries not found and not root: video decoding falls back to PyAV"
  fi
fi

PY=""
for cand in python3.12 "${PYENV_ROOT:-$HOME/.pyenv}/versions/3.12.1/bin/python"; do
  if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
    PY="$cand"; break
  fi
done
if [ -z "$PY" ] && command -v pyenv >/dev/null; then PY="$(PYENV_VERSION=3.12 pyenv which python 2>/dev/null || true)"; fi
if [ -z "$PY" ]; then echo "[setup] ERROR: Python 3.12 not found (lerobot 0.6.1 needs it); install it, e.g. 'pyenv install 3.12'" >&2; exit 1; fi

if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv with $PY"
  "$PY" -m venv .venv
fi
if [ ! -f .venv/.installed ] || [ pyproject.toml -nt .venv/.installed ]; then
  echo "[setup] installing vla-wmrl and its dependencies into .venv (first time: several GB, some minutes)"
  .venv/bin/pip install -q -U pip wheel
  .venv/bin/pip install -q -e '.[test]'
  touch .venv/.installed
fi
