"""The scripts bin/train renders from templates/ (:mod:`.render`): train.sh / train_async.sh,
join.sh, toolkit.yaml and env, from a validated configuration and a variant
(:mod:`agentcore_slime.settings.variants`)."""
