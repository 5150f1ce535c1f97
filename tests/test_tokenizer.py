"""The character tokenizer, and GPT-2 BPE written in the package vs tiktoken built from the same two files."""

import pytest
import torch

from transformer_steps.tokenizer import (
    GPT2_PATTERN,
    BPETokenizer,
    CharTokenizer,
    bytes_to_unicode,
    gpt2_files,
    load_gpt2_tokenizer,
)

TEXTS = [
    "Hello world",
    "To be, or not to be, that is the question:",
    "Tokenization isn't magic; it's BPE.",
    "naïve café in Zürich — déjà vu",
    "Привет, мир! Γειά σου κόσμε",
    "日本語のテキストと中文文本",
    "emoji 🤗🚀👩‍👩‍👧 and ✓",
    "   leading spaces, inner    runs,\ttabs\t\tand\n\n\nnewlines \n ",
    "3.14159, 1,000,000 and 2024-06-01 12:30",
    "don't, I'll, we've, they're, she'd, it's, I'M",
    "<|endoftext|>The end.<|endoftext|>",
    "",
]


@pytest.fixture(scope="module")
def tok():
    return load_gpt2_tokenizer()


@pytest.fixture(scope="module")
def reference():
    tiktoken = pytest.importorskip("tiktoken")
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks

    encoder_json, vocab_bpe = gpt2_files()
    ranks = data_gym_to_mergeable_bpe_ranks(str(vocab_bpe), str(encoder_json))
    return tiktoken.Encoding(
        name="gpt2-local",
        pat_str=GPT2_PATTERN,
        mergeable_ranks=ranks,
        special_tokens={"<|endoftext|>": 50256},
    )


def test_vocabulary_size(tok, reference):
    assert tok.vocab_size == 50257 == reference.n_vocab
    assert tok.encode("<|endoftext|>", allow_special=True) == [50256]


@pytest.mark.parametrize("text", TEXTS)
def test_ids_match_tiktoken(tok, reference, text):
    assert tok.encode(text) == reference.encode_ordinary(text)
    assert tok.encode(text, allow_special=True) == reference.encode(text, allowed_special="all")


@pytest.mark.parametrize("text", TEXTS)
def test_round_trip(tok, text):
    assert tok.decode(tok.encode(text)) == text
    assert tok.decode(tok.encode(text, allow_special=True)) == text


def test_pieces_of_a_sentence(tok):
    assert tok.pieces("Hello world, tokenization!") == ["Hello", " world", ",", " token", "ization", "!"]
    assert "".join(tok.pieces("The quick brown fox.")) == "The quick brown fox."


def test_bytes_to_unicode_is_a_bijection():
    mapping = bytes_to_unicode()
    assert sorted(mapping) == list(range(256))
    assert len(set(mapping.values())) == 256
    assert mapping[ord(" ")] == "Ġ" and mapping[ord("A")] == "A"


def test_merge_loop_follows_ranks():
    # Two competing merges: the lower rank wins, whatever the position.
    encoder = {"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5}
    tok = BPETokenizer(encoder, [("b", "c"), ("a", "bc")])
    assert tok.bpe("abc") == ["abc"]
    tok = BPETokenizer(encoder, [("a", "b")])
    assert tok.bpe("abc") == ["ab", "c"]


def test_errors(tok):
    with pytest.raises(TypeError, match="str"):
        tok.encode(b"bytes")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.decode([50257])
    with pytest.raises(ValueError, match="both"):
        load_gpt2_tokenizer(encoder_json="encoder.json")


def test_char_tokenizer_round_trip_and_order():
    tok = CharTokenizer.from_text("hello world")
    assert tok.chars == [" ", "d", "e", "h", "l", "o", "r", "w"]
    assert tok.vocab_size == 8
    ids = tok.encode("hold or low")
    assert ids == [3, 5, 4, 1, 0, 5, 6, 0, 4, 5, 7]
    assert tok.decode(ids) == "hold or low"
    assert tok.decode(torch.tensor(ids)) == "hold or low"


def test_char_tokenizer_errors_name_the_problem():
    tok = CharTokenizer.from_text("abc")
    with pytest.raises(ValueError, match=r"\['X', 'z'\]"):
        tok.encode("abzX")
    with pytest.raises(ValueError, match="out of range"):
        tok.decode([0, 3])
    with pytest.raises(ValueError, match="single character"):
        CharTokenizer(["a", "bc"])
    with pytest.raises(ValueError, match="repeated"):
        CharTokenizer(["a", "a"])
