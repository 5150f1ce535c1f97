# Colab setup: in Google Colab, install this course's package; anywhere else
# this cell does nothing.
import importlib.util
import os
import subprocess
import sys

REPO_URL = "https://github.com/transformer-steps/transformer-step-by-step"
try:
    import google.colab  # noqa: F401

    IN_COLAB = True
except ImportError:
    IN_COLAB = False
if IN_COLAB and importlib.util.find_spec("transformer_steps") is None:
    source = os.environ.get("TRANSFORMER_STEPS_SOURCE", f"git+{REPO_URL}")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", source], check=True
    )
    importlib.invalidate_caches()
