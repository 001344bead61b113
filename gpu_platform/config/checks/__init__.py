"""The rules that read the whole stack: a section against the pools, the catalog and the other keys.

One module per cloud (aws, gcp, linode) and one for the platform section, plus the rules every cloud
shares (pools). Each imports the StackConfig model and the sections it checks; `gpu_platform.config.stack`
runs them all in one validation pass. Nothing below (the model, the sections, the field types) imports these.
"""
