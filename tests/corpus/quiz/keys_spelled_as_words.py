"""The first three questions keyed by words ("one", "two", "three"), which name no question
number; the rest right.

loses: question_1: These keys are not question numbers: 'one', 'two', 'three'
loses: question_2: no answer for question 2
loses: question_3: no answer for question 3
"""

ANSWERS = {"one": "D", "two": "B", "three": "B", 4: "B", 5: "C", 6: "B", 7: "C", 8: "B", 9: "C", 10: "D",
           11: "D", 12: "C", 13: "D"}
