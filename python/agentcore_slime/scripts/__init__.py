"""The scripts bin/train renders from templates/: the variants (:mod:`.variants`) and the
renderer of train.sh / train_async.sh, join.sh, toolkit.yaml and env (:mod:`.render`)."""
