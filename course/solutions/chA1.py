"""Written answers to appendix A1's exercises (the Qwen3 tokenizer)."""

__all__ = ["EXPLANATIONS"]

EXPLANATIONS = {
    "A1.1": (
        "The same ids, [924, 58858], for both. The tokenizer's normalizer is NFC (normalizers.NFC() in\n"
        "qwen3_tokenizer_json, as in Qwen's own tokenizer.json): before the pre-tokenizer splits the text,\n"
        "e + U+0301 is composed into the single character U+00E9. Decoding gives the composed form back,\n"
        "so decode(encode(text)) == text holds only for text that is already NFC."),
    "A1.2": (
        "In a tiktoken rank file a merge's rank is the rank of the token it makes: BPE merges the pair\n"
        "whose concatenation has the lowest rank. The token of rank r can only appear as one piece by a\n"
        "merge of rank r, which the limit forbids, so BPE below r always leaves two or more pieces.\n"
        "Exactly two means the last merge of the full BPE run is the one that makes the token: that pair\n"
        "is the merge rule. Three or more would mean no single merge of what BPE reaches below r makes\n"
        "the token, so BPE would never produce it when encoding its own bytes: the file would not be a\n"
        "vocabulary learned by BPE, and bpe_merges refuses it. The checkpoint's assert (as many merges as\n"
        "multi-byte tokens) is this claim checked on all 151,387 of them."),
    "A1.3": (
        "encode, decode and len leave _transformers as None: FastTokenizer answers them from the Rust\n"
        "tokenizer. Reading pad_token_id loads transformers' tokenizer, and on a second fresh tokenizer\n"
        "so does the chat template.\n"
        "FastTokenizer defines only what serving calls (encode, decode, the vocabulary, the eos and bos\n"
        "ids, the added tokens); any other attribute goes through __getattr__ to load_transformers().\n"
        "The engine never reads pad_token_id: it packs sequences instead of padding them, and its\n"
        "end-of-sequence ids come from eos_token_id, config.json and generation_config.json. So a start\n"
        "and generate() stay free of transformers' import (tests/unit/test_fast_tokenizer.py checks it in\n"
        "a fresh process), while the first chat() pays it once."),
}
