"""The letters in a list, in question order: ANSWERS must say which question each letter answers.

loses: question_1: got list of 13 items: key each letter by its question's number
loses: question_13: got list of 13 items
"""

ANSWERS = ["D", "B", "B", "B", "C", "B", "C", "B", "C", "D", "D", "C", "D"]
