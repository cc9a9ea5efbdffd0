"""Question 1 answered twice, under 1 and under "1", with different letters: which one counts
cannot be told, so neither does. The other answers are right.

loses: question_1: answers question 1 more than once, differently
"""

ANSWERS = {1: "D", "1": "A", 2: "B", 3: "B", 4: "B", 5: "C", 6: "B", 7: "C", 8: "B", 9: "C", 10: "D",
           11: "D", 12: "C", 13: "D"}
