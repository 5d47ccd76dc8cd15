enum Placeholder_SwitchyardTestSupport {}
