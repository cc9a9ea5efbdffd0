"""Right: lower-case letters, some with spaces around them, keyed "Q1" to "Q15" as the quiz's own
text numbers its questions; the annotation of the stub kept.
"""

ANSWERS: dict[str, str] = {
    "Q1": "d", "Q2": " b", "Q3": "b", "Q4": "b ", "Q5": "c", "Q6": "b", "Q7": "c",
    "Q8": "b", "Q9": "c", "Q10": "d", "Q11": "d", "Q12": "c", "Q13": "d", "Q14": "b ", "Q15": "c",
}
