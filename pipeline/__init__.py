"""medprep: corpus preparation for language-model pretraining."""
import os

# Nothing in this package may reach a model or dataset hub at run time: make the HF
# libraries fail fast instead of trying.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Presidio imports transformers when it is installed (the [dev] extra has it, for the trainer
# checks), which then advises on stderr that torch is missing: nothing here needs torch.
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

__version__ = "0.1.0"
