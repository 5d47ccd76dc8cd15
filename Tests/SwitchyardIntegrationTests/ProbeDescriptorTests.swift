import Foundation
import SwitchyardCore
import Testing
@testable import SwitchyardTestSupport

/// The test probe on a socket numbered past 1023. libmosquitto's own loop waits in select(2), and glibc
/// ends the whole test process there ("bit out of range 0 - FD_SETSIZE on fd_set"): a parallel run holds
/// close to a thousand descriptors, and one under AddressSanitizer crossed the line. The probe's own
/// thread polls instead (MQTTProbe.swift, ProbeLoop).
@Suite struct ProbeDescriptorTests {
    static var limitAllowsIt: Bool {
        var limit = rlimit()
        guard getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return false }
        if limit.rlim_cur < 2_048 && limit.rlim_max >= 2_048 {
            limit.rlim_cur = 2_048
            _ = setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
            _ = getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
        }
        return limit.rlim_cur >= 2_048
    }

    @Test(.enabled(if: limitAllowsIt, "fewer than 2 048 descriptors allowed"))
    func aProbeWorksOnASocketNumberedPast1023() async throws {
        let broker = try await Broker.start()
        defer { broker.stop() }
        // Descriptors held until the probe's socket is open, so that it gets a number past 1023.
        var filler: [Int32] = []
        defer { for fd in filler { close(fd) } }
        while filler.count < 1_500 {
            let fd = open("/dev/null", O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { break }
            filler.append(fd)
            if fd > 1_040 { break }
        }
        let probe = try await MQTTProbe.connect(port: broker.port)
        defer { probe.close() }
        for fd in filler { close(fd) }
        filler = []
        #expect(probe.socketNumber > 1_023, "the probe's socket is \(probe.socketNumber): the test shows nothing")
        try await probe.subscribe("probe-fd/#")
        probe.publish("probe-fd/t", "hello")
        try await probe.waitFor(topic: "probe-fd/t", payload: "hello")
    }
}
