"""The submitted module is a symbolic link to reference/<module>.py: the learner writes no code,
and whoever copies the submission as root reads the reference for them.
kind: symlink
beats-without-sandbox: ex4
"""
