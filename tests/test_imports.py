"""What importing the package pulls in, each checked in a fresh interpreter."""

import subprocess
import sys


def python_output(code: str) -> str:
    """Run code in a new interpreter (this one has imported everything already); its stripped stdout."""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_package_imports_without_transformers():
    code = ("import sys; sys.modules['transformers'] = None\n"  # any `import transformers` now fails
            "import transformer_steps\n"
            "try:\n    transformer_steps.from_hf(transformer_steps.TransformerLM("
            "transformer_steps.ModelConfig(vocab_size=8, max_seq_len=4, d_model=8, n_layers=1, n_heads=2)))\n"
            "except ImportError:\n    print('needs transformers')\n")
    assert python_output(code) == "needs transformers"


def test_importing_and_decoding_loads_nothing_beyond_what_torch_and_numpy_load():
    # matplotlib loads only for plots, tqdm/regex only with the training and tokenizer modules,
    # transformers only inside from_hf
    code = ("import sys\nimport numpy, torch\n"
            "before = {name.split('.')[0] for name in sys.modules}\n"
            "import transformer_steps as ts\n"
            "model = ts.TransformerLM(ts.ModelConfig.preset('llama-tiny')).eval()\n"
            "ts.generate(model, torch.tensor([[1, 2, 3]]), 3, temperature=0.0)\n"
            "new = {name.split('.')[0] for name in sys.modules} - before - set(sys.stdlib_module_names)\n"
            "print(sorted(name for name in new if not name.startswith('_')))\n")
    assert python_output(code) == "['transformer_steps']"
