"""Scoring candidates: recall (RULER, MQAR) and language modelling (validation loss, lm-eval)."""
