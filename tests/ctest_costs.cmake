# ctest runs tests in descending COST. Without a CTestCostData.txt of an
# earlier run (a fresh CI machine), every test costs the same and they start
# in the order they are added: the MPI tests, added last and one at a time
# (RESOURCE_LOCK mpi), then ran alone with the other core idle, and the
# longest tests ended the run. The costs below are each test's seconds in the
# ASan build (scripts/test.sh prints them), so that the longest start first;
# tests/mpi, tests/soak and tests/launcher give the MPI tests higher costs,
# so that their chain runs beside the others from the start. Included by the
# directories that hold these tests (tests/, tests/gpu, tests/cli,
# tests/spec); a name a directory does not hold is ignored.
foreach(entry
    "PlanStatsFastPath.CellsBeyondTheIndexTablesMatchTheEnumeration 50"
    "gpu.EngineEmulation.StagedSpecsMatchExecuteHost 29"
    "PlanRelays.UnevenFleetsKeepTheBusiestNicNearItsBound 43"
    "EngineDevicePath.StagedSpecsMatchExecuteHost 20"
    "PlanThreads.RandomCasesPlanIdenticallyOnAnyThreadCount 36"
    "PlanRelays.RunsAcrossHostsShareTheForwardingOverEveryEntry 3"
    "WireExact.EveryRealPlanDecodes 16"
    "WirePartDigest.EveryEditedValueOfEveryPartIsRejected 4"
    "PlanReplay.LikeTensorsPlanAsIfEnumeratedAlone 29"
    "PlanThreads.ManyTensorsAndRoundsPlanIdentically 29"
    "PlanScratch.PartialFleetsKeepTheBusiestNicNearItsBound 28"
    "PlanProperty.RandomCasesCoverPairMeetBoundAndAreDeterministic 28"
    "PlanRelays.RandomFleetsKeepTheBusiestNicNearItsBound 27"
    "PlanRelays.RandomFleetsAreExactAndMeetTheHostBounds 25"
    "WireExact.EverySingleEditIsRejectedOrExact 23"
    "PlanScratch.BudgetPreReducesTheGroupsItHolds 20"
    "WireCorrupt.EveryBitFlipDecodesConsistentlyOrIsRejected 19"
    "EngineOverlap.StagedPlansMatchTheOracleUnderRandomDeliveryDelays 17"
    "EngineDevicePath.StagedSpecsAcrossRanksMeetTheOracle 17"
    "PlanProperty.RelayBandsKeepCoveragePairingAndExactStatistics 16"
    "PlanScratch.PsumFleetsPreReduceOnTheHoldersHosts 15"
    "PlanScratch.PsumInPlaceSpreadsOverEveryDevice 13"
    "EngineOverlap.LastStageStopsAfterThatStage 13"
    "Wire.TensorsSharingAShardingShareOneTiling 12"
    "PlanRelays.HolderDevicesLoadedSeveralTimesCrossByTheEstimate 12"
    "CopyBox.InterleavedCopiesMatchNaiveReference 11"
    "PlanFragments.PastThePairCapNoBoxIsRefined 11"
    "WireExact.RandomEditsAreRejectedOrExact 11"
    "spec.schema.mutations 34"
    "cli.plan_limit 30"
    "cli.plan_file 28"
    "cli.casts 28"
    "cli.verify 19"
    "cli.simulate 18"
    "cli.plan_threads 11"
    "cli.show_svg_scale 11")
  string(REPLACE " " ";" pair "${entry}")
  list(GET pair 0 name)
  list(GET pair 1 cost)
  set_tests_properties("${name}" PROPERTIES COST ${cost})
endforeach()
# Label dev_only: statistics-only property tests that the asan test preset
# leaves out (CMakePresets.json). They check figures against bounds, not
# memory; the dev build runs them at full scale, and their generators' plans
# run under ASan through their siblings that execute them against the oracle
# (PlanRelays.RandomFleetsAreExactAndMeetTheHostBounds, UnevenFleetsAreExact).
# Under ASan they took 245-259 s each of a 2-core run's 1,784 s of tests.
# PlanFragments.AboveTheIncidenceCapEachBoxKeepsItsCell likewise checks one
# plan's statistics (3,000 nested boxes past the incidence cap: 109 s under
# ASan); the same fallback, a cell per distinct box, runs under ASan through
# PlanFragments.PastThePairCapNoBoxIsRefined and AboveTheCapEachBoxKeepsItsCell.
foreach(name
    "PlanRelays.RandomFleetsKeepTheBusiestNicNearItsBound"
    "PlanRelays.UnevenFleetsKeepTheBusiestNicNearItsBound"
    "PlanFragments.AboveTheIncidenceCapEachBoxKeepsItsCell")
  set_tests_properties("${name}" PROPERTIES LABELS dev_only)
endforeach()
