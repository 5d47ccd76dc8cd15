enum Placeholder_SwitchyardCoreTests {}
