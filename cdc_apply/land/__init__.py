"""cdc_apply.land"""
