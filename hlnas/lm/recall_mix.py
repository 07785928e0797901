"""The recall protocol mixed into LM training (``train.recall_every``): every ``train.recall_every`` corpus documents,
``train.recall_count`` recall-format documents are mixed in (:func:`recall_documents`): complete RULER instances as
text, or MQAR instances as token ids (``train.recall_format: mqar``, their symbols mapped into the tokenizer's
vocabulary: :func:`mqar_recall_config`); :func:`recall_mix` gives both for one run.
The trained candidate is scored on held-out instances of the same format by :mod:`hlnas.score.mqar_mixed`.
"""

from __future__ import annotations

from hlnas.recall.mqar import MqarTask, mqar_documents, mqar_token_map

__all__ = ["recall_mix", "recall_documents", "mqar_recall_config"]


def recall_mix(train, tokenizer):
    """``(mixed_mqar, documents)`` for a run of ``train`` (the recipe's TrainConfig) in ``tokenizer``'s tokens: the
    MQAR instances it mixes in (:func:`mqar_recall_config`, None unless ``recall_format: mqar``) and the documents
    passed to training (:func:`recall_documents`, None when nothing is mixed in)."""
    mixed = mqar_recall_config(train, tokenizer)
    return mixed, recall_documents(train, tokenizer, mixed)


def recall_documents(train, tokenizer, mixed_mqar=None):
    """The recall protocol's training mix, passed to ``train(extra_docs=...)``: ``seed -> Iterator`` of complete RULER
    instances (text, in ``tokenizer``'s tokens) or MQAR instances (token ids: ``mixed_mqar``, the run's
    :func:`mqar_recall_config`), drawn from seeds disjoint from evaluation; None when ``train.recall_every`` (of the
    recipe's :class:`~hlnas.lm.trainer.TrainConfig`) is 0."""
    if not train.recall_every:
        return None
    if train.recall_format != "mqar":  # RULER instances as text
        from hlnas.recall.ruler import ruler_training_documents

        length = train.recall_length or train.seq_len
        return lambda seed: ruler_training_documents(tokenizer, length, seed)
    return lambda seed: mqar_documents(mixed_mqar, seed)


def mqar_recall_config(train, tokenizer):
    """The MQAR instances a ``recall_format: mqar`` run trains on (and is scored on, held out, by the
    ``mqar_mixed`` objective), or None for other runs: symbols mapped into ``tokenizer``'s vocabulary."""
    if not train.recall_every or train.recall_format != "mqar":
        return None
    return MqarTask(vocab_size=train.recall_vocab, seq_len=train.recall_length or train.seq_len,
                      num_kv_pairs=train.recall_kv_pairs,
                      token_map=mqar_token_map(train.recall_vocab, tokenizer.vocab_size, tokenizer.eos_id))
