"""A job: the plan of every step (plan, campaign_plan), the script (render, shell), its submission
(submit, hetjob) and following it (watch, progress). Reads the model; never reads results."""
