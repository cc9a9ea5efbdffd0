"""Right: dict(enumerate(...)) of the words of a lower-case string, made upper case, numbered from 1.
"""

ANSWERS = dict(enumerate("d b b b c b c b c d d c d b c".upper().split(), start=1))
