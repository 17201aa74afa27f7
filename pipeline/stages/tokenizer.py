"""tokenizer: byte-level BPE (HF tokenizers) trained on the train split only, or an existing
tokenizer.json loaded instead. Documents pass through unchanged for the pack stage."""
from __future__ import annotations

import shutil

import pyarrow.compute as pc
from pydantic import Field, model_validator

from pipeline.stages.base import Stage, StageConfig

TOKENIZER_FILE = "tokenizer.json"


class TokenizerConfig(StageConfig):
    vocab_size: int = Field(default=32_000, ge=300, le=1_000_000)
    min_frequency: int = Field(default=2, ge=1)
    special_tokens: list[str] = ["<|endoftext|>"]
    eos_token: str = "<|endoftext|>"
    # Use this tokenizer.json instead of training one.
    tokenizer_path: str | None = None

    @model_validator(mode="after")
    def _eos_is_special(self):
        if self.tokenizer_path is None and self.eos_token not in self.special_tokens:
            raise ValueError(f"eos_token {self.eos_token!r} must be one of special_tokens")
        return self


def build_trainer(cfg: TokenizerConfig):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=cfg.vocab_size, min_frequency=cfg.min_frequency,
                                  special_tokens=list(cfg.special_tokens),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    return tok, trainer


class TrainTokenizer(Stage):
    name = "tokenizer"
    summary = "byte-level BPE trained on the train split (or a given tokenizer.json)"
    Config = TokenizerConfig
    kind = "global"
    artifacts = {TOKENIZER_FILE: f"tokenizer/{TOKENIZER_FILE}"}

    def run(self, inputs, output) -> dict:
        from tokenizers import Tokenizer

        target = output.folder / TOKENIZER_FILE
        train_docs = 0
        if self.config.tokenizer_path:
            shutil.copyfile(self.config.tokenizer_path, target)
            tok = Tokenizer.from_file(str(target))
        else:
            tok, trainer = build_trainer(self.config)
            counter = {"docs": 0}

            def train_texts():
                for table in inputs.tables(output):
                    if "split" in table.column_names:
                        table = table.filter(pc.equal(table["split"], "train"))
                    counter["docs"] += table.num_rows
                    yield table["text"].to_pylist()
            tok.train_from_iterator(train_texts(), trainer=trainer)
            tok.save(str(target))
            train_docs = counter["docs"]
        if tok.token_to_id(self.config.eos_token) is None:
            from pipeline.errors import UserError
            raise UserError(f"stages.tokenizer.eos_token: {self.config.eos_token!r} is not in the tokenizer's vocabulary")
        # Documents pass through unchanged: pack reads them from here.
        for table in inputs.tables(output if self.config.tokenizer_path else None):
            output.write(table)
        return {"vocab_size": tok.get_vocab_size(), "trained_on_docs": train_docs,
                "trained": self.config.tokenizer_path is None}
