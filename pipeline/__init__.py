"""medprep: corpus preparation for language-model pretraining."""
import os

# Nothing in this package may reach a model or dataset hub at run time: make the HF
# libraries fail fast instead of trying.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

__version__ = "0.1.0"
