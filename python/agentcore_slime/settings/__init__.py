"""Every setting, declared once: the env-file schema (:mod:`.schema`), the env-file reader
(:mod:`.envfile`), the value checks shared by bin/train and the rollout (:mod:`.checks`,
:mod:`.credentials`, :mod:`.validate`), and the rollout's view of them, toolkit.yaml read from
slime's args (:mod:`.config`).

Standard library only but for :mod:`.envfile` (python-dotenv): bin/train, bin/eval, bin/doctor,
the rollout and the gateway all import it.
"""
