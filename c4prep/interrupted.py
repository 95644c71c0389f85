"""What a command says when Ctrl-C stops it: one line on stderr, exit status 130. Imports nothing, so the console
scripts (`launch`) can say it while they import the rest."""

INTERRUPTED_EXIT_CODE = 130  # 128 + SIGINT, as a shell reports a command Ctrl-C stopped
INTERRUPTED = ("Interrupted: stopped before finishing; run the command again (it cleans up what this run left, and "
               "a published output is replaced only by a complete one)")
TRAINING_INTERRUPTED = "run the same command again: a training stage resumes from its run folder's latest checkpoint"
