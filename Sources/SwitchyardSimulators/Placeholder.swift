enum Placeholder_SwitchyardSimulators {}
