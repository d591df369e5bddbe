"""cdc_apply.config"""
