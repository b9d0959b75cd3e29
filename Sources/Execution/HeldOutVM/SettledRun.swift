import Benchmark
import ExperimentModel
import Sandbox

extension HeldOutVM {
    /// A held-out phase in this VM, then what qemu read through the host's page cache on the
    /// guest's behalf evicted and the host's process serial (which qemu's threads moved)
    /// moved by noise, whether the VM answered or not, before anything untrusted runs again.
    /// The supervisor's VM executor and a worker node's VM take this one path; `withheld`
    /// says what does not happen to the results when the settling fails.
    func runSettled(_ request: GuestRequest, image: GuestImage, scratch: String, privateDirectory: String, deadline: Double,
                    egress: VMEgress? = nil, journal: String, withheld: String) throws -> Run {
        let cache = PageCacheEviction(journal: journal)
        func settle() -> String? { HeldOutSettle.settle(cache, onHost: false, log: log, prefix: "held-out VM done; ") }
        let result: Run
        do {
            result = try run(request, image: image, scratch: scratch, privateDirectory: privateDirectory, deadline: deadline, egress: egress) { shares in
                do { try cache.record(sources: shares) } catch { throw ExperimentError(.io, "", cause: error) }
            }
        } catch {
            _ = settle()
            throw error
        }
        if let failure = settle() {
            throw ExperimentError(.io, "after the held-out VM: \(failure); its results were not \(withheld)")
        }
        return result
    }
}
