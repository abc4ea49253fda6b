"""The model everything stands on: configuration layers (config), their checks (validate, site_checks,
roles: the one rule table of every role), the typed experiment (experiment), schedules (campaign), time (duration), the run
directory (rundir) and Slurm's vocabulary (slurm)."""
