"""A tiny random Qwen2 model and a byte-level BPE tokenizer trained here on SQL text.

No downloads: the tokenizer is trained in a fraction of a second from the corpus below
and wrapped with a ChatML template (the template family of SmolLM2 and Qwen).
"""

from __future__ import annotations

import functools

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_CORPUS = [
    "SELECT name FROM schools WHERE city = 'Fresno' ORDER BY enrollment DESC LIMIT 3;",
    "SELECT COUNT(*) FROM orders o JOIN customers c ON o.customer_id = c.id GROUP BY c.region",
    "<think>I need the table list.</think><action>explore_schema</action>",
    '<tool_call>{"name": "execute_sql_query", "arguments": {"db_id": "db", "sql": "SELECT 1"}}</tool_call>',
    "<scratch_pad>intent: count rows</scratch_pad><final_answer>SELECT 1</final_answer>",
    "<relevant_tables>schools</relevant_tables><relevant_columns>schools.name</relevant_columns>",
    '<schema>{"tables": ["schools"], "columns": {"schools": ["name"]}, "joins": []}</schema>',
    "<answer>```sql\nSELECT AVG(score) FROM exams WHERE year >= 2010\n```</answer>",
    'Schema acknowledged: 1 table(s), 2 column(s). <tool_response>{"columns": ["a"], "rows": [[1]]}</tool_response>',
    "What is the average enrollment of schools in each county? Evidence: enrollment means students.",
]


@functools.lru_cache(maxsize=1)
def tiny_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 20, trainer=trainer)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|im_end|>",
        bos_token=None,
        unk_token=None,
    )
    wrapped.chat_template = CHATML_TEMPLATE
    return wrapped


def tiny_model(seed: int = 0, vocab_size: int | None = None):
    """A random 2-layer Qwen2 (hidden 64) matching ``tiny_tokenizer``'s vocabulary."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tokenizer = tiny_tokenizer()
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=vocab_size or len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    return Qwen2ForCausalLM(config)


def soft_capped_model():
    """A one-layer random Gemma 2, whose logits are soft-capped (its head is not plain)."""
    from transformers import Gemma2Config, Gemma2ForCausalLM

    config = Gemma2Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        final_logit_softcapping=30.0,
    )
    return Gemma2ForCausalLM(config)
