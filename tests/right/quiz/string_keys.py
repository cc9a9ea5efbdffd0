"""Right: the question numbers written as strings, {"1": "D", ...}; the answers are those of the
key, one capital letter each.
"""

ANSWERS = {
    "1": "D",
    "2": "B",
    "3": "B",
    "4": "B",
    "5": "C",
    "6": "B",
    "7": "C",
    "8": "B",
    "9": "C",
    "10": "D",
    "11": "D",
    "12": "C",
    "13": "D",
    "14": "B",
    "15": "C",
}
