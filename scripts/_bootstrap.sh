# Sourced by scripts/test and scripts/dev: make .venv with drainpipe and its dev extras.
# Uses uv (installed with pip when missing); never downloads a Python build.
export UV_PYTHON_DOWNLOADS=never
PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -m uv --version >/dev/null 2>&1; then
    "$PYTHON" -m pip install -q uv 2>/dev/null || "$PYTHON" -m pip install -q --user uv
fi
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m uv venv -q .venv --python "$PYTHON"
fi
# a stamp keeps repeated runs fast: reinstall only when pyproject.toml changed
if [ ! -f .venv/.drainpipe-installed ] || [ pyproject.toml -nt .venv/.drainpipe-installed ]; then
    "$PYTHON" -m uv pip install -q --python .venv/bin/python -e '.[dev,supabase]'
    touch .venv/.drainpipe-installed
fi
