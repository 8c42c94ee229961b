"""The method's math and prompts: integrated rewards and advantages, consistency feedback, task
adaptation, the PPO-clip loss, verdict parsing, intervals and RLoop's selection."""
