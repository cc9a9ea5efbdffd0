"""Each submitted module is a symbolic link to its reference/<module>.py: the learner writes no
code, and whoever copies the submission as root reads the reference for them.
links: ex4=reference/ex4_master_weights.py quiz=reference/quiz.py
beats-without-sandbox: ex4 quiz
"""
