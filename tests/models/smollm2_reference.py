"""What issue 21 asks of SmolLM2-135M-Instruct (Q4_1 GGUF): "The capital of France is" tokenized,
and the 20 ids greedy decoding gives after it (' Paris.\n\nThe answer is: 2018-01-22 ')."""

PROMPT = "The capital of France is"
PROMPT_IDS = [504, 3575, 282, 4649, 314]
GREEDY_IDS = [
    7042,
    30,
    198,
    198,
    504,
    2988,
    314,
    42,
    216,
    34,
    32,
    33,
    40,
    29,
    32,
    33,
    29,
    34,
    34,
    216,
]
GREEDY_TEXT = " Paris.\n\nThe answer is: 2018-01-22 "
