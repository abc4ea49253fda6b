"""The model everything stands on: configuration layers (config), their checks (validate, site_checks,
pd_checks), the typed experiment (experiment), schedules (campaign), time (duration), the run
directory (rundir) and Slurm's vocabulary (slurm)."""
