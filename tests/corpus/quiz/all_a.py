"""A learner guessing "A" everywhere (no answer of the key is A).

loses: question_1: is not right
loses: question_2: is not right
loses: question_3: is not right
loses: question_4: is not right
loses: question_5: is not right
loses: question_6: is not right
loses: question_7: is not right
loses: question_8: is not right
loses: question_9: is not right
loses: question_10: is not right
loses: question_11: is not right
loses: question_12: is not right
loses: question_13: is not right
loses: question_14: is not right
loses: question_15: is not right
"""

ANSWERS = {1: "A", 2: "A", 3: "A", 4: "A", 5: "A", 6: "A", 7: "A", 8: "A", 9: "A", 10: "A", 11: "A", 12: "A", 13: "A",
           14: "A", 15: "A"}
