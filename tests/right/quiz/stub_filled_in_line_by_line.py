"""Right: the stub's dict of None left as it is, and each answer assigned below it, one line per
question, as a learner working through the questions might; the last two set with .update.
"""

ANSWERS: dict[int, str | None] = {
    1: None, 2: None, 3: None, 4: None, 5: None, 6: None, 7: None,
    8: None, 9: None, 10: None, 11: None, 12: None, 13: None,
    14: None, 15: None,
}

ANSWERS[1] = "D"
ANSWERS[2] = "B"
ANSWERS[3] = "B"
ANSWERS[4] = "B"
ANSWERS[5] = "C"
ANSWERS[6] = "B"
ANSWERS[7] = "C"
ANSWERS[8] = "B"
ANSWERS[9] = "C"
ANSWERS[10] = "D"
ANSWERS[11] = "D"
ANSWERS.update({12: "C", 13: "D", 14: "B", 15: "C"})
