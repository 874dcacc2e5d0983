"""torch's argument names on fastcomm's public API, the deprecated former names,
and the fast DDP path's hints (checks_api_names.py)."""

import checks_api_names as checks


def test_powersgd_torch_names_match_old_names(ranks):
    ranks.run(checks.powersgd_torch_names_match_old_names)


def test_powersgd_former_names_refused_with_current_ones(ranks2):
    ranks2.run(checks.powersgd_former_names_refused_with_current_ones)


def test_powersgd_state_reads_like_torchs(ranks2):
    ranks2.run(checks.powersgd_state_reads_like_torchs)


def test_register_hints_the_fast_path(ranks2):
    ranks2.run(checks.register_hints_the_fast_path)


def test_enable_ddp_arena_puts_buckets_in_the_arena(ranks2):
    ranks2.run(checks.enable_ddp_arena_puts_buckets_in_the_arena)


def test_model_sync_takes_process_group(ranks):
    ranks.run(checks.model_sync_takes_process_group)
