// Loading a policy hands out PolicyModel's types: importing SandboxPolicy brings them along.
@_exported import PolicyModel
