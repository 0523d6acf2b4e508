"""Contrastive training: loss, loop, engines (single / ddp / deepspeed), GradCache, checkpoints."""
