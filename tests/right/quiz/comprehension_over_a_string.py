"""Right: ANSWERS built by a dict comprehension that pairs the question numbers with the letters of
one string, written in the file (nothing computed from outside it).
"""

LETTERS = "DBBBCBCBCDDCD"  # questions 1 to 13, in order

ANSWERS = {number: letter for number, letter in zip(range(1, 14), LETTERS)}
ANSWERS[15] = "C"  # the checkpoint question (14 is another exercise's)
