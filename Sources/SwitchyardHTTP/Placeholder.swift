enum Placeholder_SwitchyardHTTP {}
