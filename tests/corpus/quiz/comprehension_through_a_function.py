"""ANSWERS built by a comprehension that calls a function of the file's own: the function is code,
not data, so the text does not say what the answers are (such a function could read the key).

loses: question_1: it calls `pick`, which is not data
loses: question_7: it calls `pick`, which is not data
"""

_LETTERS = "DBBBCBCBCDDCD"


def pick(question):
    return _LETTERS[question - 1]


ANSWERS = {q: pick(q) for q in range(1, 14)}
