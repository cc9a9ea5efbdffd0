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
"""

ANSWERS = {q: "A" for q in range(1, 12)}
