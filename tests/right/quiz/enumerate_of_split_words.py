"""Right: dict(enumerate(...)) of the words of a lower-case string, made upper case, numbered from 1.
"""

ANSWERS = dict(enumerate("d b b b c b c b c d d c d".upper().split(), start=1))
ANSWERS[15] = "C"
