enum Placeholder_SwitchyardConfigTests {}
