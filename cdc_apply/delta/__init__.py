"""cdc_apply.delta"""
