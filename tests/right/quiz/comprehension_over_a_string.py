"""Right: ANSWERS built by a dict comprehension that pairs the question numbers with the letters of
one string, written in the file (nothing computed from outside it).
"""

LETTERS = "DBBBCBCBCDDCDBC"  # questions 1 to 15, in order

ANSWERS = {number: letter for number, letter in zip(range(1, 16), LETTERS)}
